"""mfulib: the shared library behind triton-mfu-analyzer's scripts.

One module per concept: cases (case files), opdir (work directories), compat (running Triton-Ascend code on
CUDA/CPU), discover/prepare (step 1), and the measurement modules added by later steps.
"""

__version__ = "0.1.0"
