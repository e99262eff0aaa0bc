"""clawmem benchmark harness: retrieval quality on public data sets, speed and scale on generated workspaces.

Run ``python -m bench run --profile quick`` (see ``bench/README.md``).
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
