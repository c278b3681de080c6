"""provision: take N Linux machines to a working multi-node PyTorch cluster, and prove it."""

__version__ = "0.2.0"
COLLECTION = "provision.cluster"
