"""Where the project's own files are: the scripts directory (the CLIs, on ``sys.path`` for ``import mfulib``) and the
repository root. The one place that knows how deep this library sits below them."""
import os

#: scripts/ - the CLIs and the ``mfulib`` package (put on ``sys.path`` and ``PYTHONPATH`` of child processes)
SCRIPTS_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the repository root (Makefile, examples/, kb/)
REPO_ROOT = os.path.dirname(SCRIPTS_DIR)
