"""commscope: find where communication holds back distributed training and inference."""

__version__ = "0.1.0"
