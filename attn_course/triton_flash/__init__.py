"""Triton FlashAttention (notebooks 08 and 09): kernels, their launchers, the runtime set-up, autotuning."""
