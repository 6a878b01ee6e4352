"""Timing commands for one machine's GPU or CPU (`python -m playground.measure.hardware.X`): runners,
CUDA paths, the oracle, CPU kernels and the lab's timing, each with a CPU smoke mode for the tests."""
