"""NVRTC JIT and its cache, the DLPack seam, deferred checks, flag words, occupancy, arch limits
and the row-kernel kinds (imports only kernel_lab.base)."""
