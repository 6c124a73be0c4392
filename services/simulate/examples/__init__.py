"""The bundled example cluster, workload and device config of ``vgpu-scheduler simulate`` (package data)."""
