"""float64 checks of variants, the case sets, compute-sanitizer (imports core, cuda)."""
