"""wetqa: attributed question answering over Dutch law.

The pipeline lives in the top-level packages ``corpus``, ``retrieval``,
``generation``, ``evaluation`` and ``serve``; this package holds what they
share (atomic file output, configuration) and the ``wetqa`` console script.
"""

__version__ = "0.1.0"
