"""planner: capacity planning for LLM servers running the vLLM v1 scheduler.

Installed as the distribution ``vllm-capacity-planner``; the import name
stays ``planner`` (see ``planner.distribution`` for the clash this marks).
"""

from planner import distribution as _distribution

__distribution__ = _distribution.NAME  # the marker planner.distribution.check() looks for
__version__ = "0.1.0"
