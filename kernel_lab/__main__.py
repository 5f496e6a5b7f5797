from kernel_lab.cli import main

raise SystemExit(main())
