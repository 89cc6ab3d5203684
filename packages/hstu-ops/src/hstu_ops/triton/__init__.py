"""Triton kernels of hstu_ops (Liger-Kernel style: one module per op family).

Importing this package does not import ``triton``; only the modules inside it do. Reach them
through the ops' ``kernel=Kernel.TRITON`` (which reports a missing triton clearly) or import
``hstu_ops.triton.triton_hstu_attention`` directly.
"""
