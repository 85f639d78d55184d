"""vort: power-law transformer memory (VORT) from Python.

The Rust core is the source of truth: the certified sums of exponentials and node tables
(``gl_weights``, ``soe``, ``shared_nodes``), the retention core of ``vort retention``
(``retention``) and trained models of ``vort train`` / ``vort export`` (``load``).
``vort.torch`` (extra ``vort[torch]``) is the layer and the model in PyTorch, with node tables
from this core.

User errors raise ``ValueError`` with the message the ``vort`` CLI prints; failures of the run
and internal errors (a Rust panic) raise ``RuntimeError``.
"""

from ._vort import (
    Model,
    SharedNodes,
    Soe,
    State,
    __version__,
    gl_weights,
    load,
    retention,
    shared_nodes,
    soe,
)

__all__ = [
    "Model",
    "SharedNodes",
    "Soe",
    "State",
    "__version__",
    "gl_weights",
    "load",
    "retention",
    "shared_nodes",
    "soe",
]
