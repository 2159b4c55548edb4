"""planner: capacity planning for LLM servers running the vLLM v1 scheduler."""

__version__ = "0.1.0"
