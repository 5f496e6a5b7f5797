"""The shared row-kernel family: its forward kinds (``kinds``: one object each), launch shapes
(``forward_config``, ``backward_config``, over ``geometry``: what a row spans) and launchers
(``launch``) of the kernels in ``cuda_src/row_softmax_kernels.cuh`` and the backward headers.
An op instantiates the family with its own epilogue in its own ``.cu`` file and launches it
through :class:`launch.RowKernels`; nothing here names an op."""
