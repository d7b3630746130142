"""streamguard: streaming, on-device privatizer for correlated (Markov) sensor streams."""

from .model.chain import MarkovChain, ModelError

__version__ = "0.1.0"
__all__ = ["MarkovChain", "ModelError", "__version__"]
