"""Do all the clusters that the occupancy API calls resident really run at once?

    python bench/cluster_probe.py [--clusters 8,15,16] [--smem 122880] [--threads 128]

For each cluster size: a grid of as many clusters as ``cuOccupancyMaxActiveClusters`` allows
(what the persistent kernels launch), each CTA holding its SM for ``--spin-us``, then the same
plus one cluster (a control: that one must start late). Prints per grid the resident count,
the clusters launched, the SMs used and how many clusters started only after another CTA had
finished (kernel_lab/ops/softmax/persistent.py, ``cluster_placement``; the kernel is
cuda_src/cluster_probe.cu), then the SM ids of each cluster of the first grid.
"""

from __future__ import annotations

import argparse

import torch

from kernel_lab import occupancy as pc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clusters", default="8,15,16", help="cluster sizes (of "
                    f"{pc.PROBE_CLUSTERS})")
    ap.add_argument("--threads", type=int, default=128)
    ap.add_argument("--smem", type=int, default=120 * 1024, help="dynamic shared memory per "
                    "CTA (default: over half an SM: one CTA per SM)")
    ap.add_argument("--spin-us", type=float, default=200.0)
    args = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}: {props.multi_processor_count} SMs")
    for cl in (int(c) for c in args.clusters.split(",") if c):
        first = pc.cluster_placement(cl, args.threads, args.smem, spin_us=args.spin_us)
        extra = pc.cluster_placement(cl, args.threads, args.smem, clusters=first.resident + 1,
                                     spin_us=args.spin_us)
        print(first.summary())
        print(f"  control, one cluster more: {extra.late_clusters()} started late")
        by_cluster: dict[int, list[int]] = {}
        for sm, c, _rank, _start, _end in first.records:
            by_cluster.setdefault(c, []).append(sm)
        for c, sms in sorted(by_cluster.items()):
            print(f"  cluster {c}: SMs {sorted(sms)}")


if __name__ == "__main__":
    main()
