"""wetqa: attributed question answering over Dutch law.

One namespace, one stage per subpackage, arrows pointing one way:
``wetqa.serve`` -> ``wetqa.generation`` -> ``wetqa.retrieval`` -> ``wetqa.corpus``
-> core (``wetqa.records``-like modules: ``dataset``, ``io``, ``config``,
``console``, ``home``); ``wetqa.evaluation`` reads records beside them and is
imported only by the top layer (``wetqa.cli``, ``wetqa.experiment``,
``wetqa.doctor``). This file imports nothing, so importing any stage stays cheap.
"""

__version__ = "0.1.0"
