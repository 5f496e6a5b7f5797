"""The lab's ``nn.Module`` drop-ins (also at the package root), and their base class."""

from kernel_lab.core.dropin import DropIn
from kernel_lab.ops.cross_entropy.api import CrossEntropyLoss
from kernel_lab.ops.linear_cross_entropy.api import LinearCrossEntropyLoss
from kernel_lab.ops.log_softmax.api import LogSoftmax
from kernel_lab.ops.softmax.api import Softmax

__all__ = ["CrossEntropyLoss", "DropIn", "LinearCrossEntropyLoss", "LogSoftmax", "Softmax"]
