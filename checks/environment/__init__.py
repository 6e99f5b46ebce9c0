"""Environment checks (``ENV3xx``; the distributed variables go to :mod:`dsdoctor.checks.network`'s ``NET4xx``):
the facts of a machine and the verdicts on them.

Facts are gathered by :func:`collect` through a :class:`Probe` (environment, executables, NVML), so every rule can
be tested with controlled inputs; :func:`diagnose` turns facts into findings and never imports anything. The fast
path imports neither torch nor DeepSpeed: torch's version and CUDA come from ``torch/version.py`` and DeepSpeed's
build from ``deepspeed/git_version_info_installed.py``, read as files (what ``ds_report`` prints after importing
both).
"""

from .diagnose import diagnose, paste_block  # noqa: F401
from .facts import (BUILD_SCRIPT, Probe, arch_list_problems, build_findings, build_op, collect,  # noqa: F401
                    deep_facts, nvml_facts, ops_for_config)
from .rules import *  # noqa: F401,F403
from .rules import GIB, KNOWN_BAD, THROTTLE_BAD  # noqa: F401
