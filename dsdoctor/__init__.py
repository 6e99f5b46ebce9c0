"""dsdoctor: finds DeepSpeed fine-tuning pitfalls before the long run."""

__version__ = "0.1.0"
