"""The op packages the registry imports, in order. Adding an op = new package + one line here."""

OP_MODULES: tuple[str, ...] = (
    "kernel_lab.ops.softmax",
    "kernel_lab.ops.log_softmax",
    "kernel_lab.ops.cross_entropy",
    "kernel_lab.ops.linear_cross_entropy",
)
