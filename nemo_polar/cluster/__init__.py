"""Cluster launch: which node runs what (topology.py) and the SLURM driver around NeMo-RL's ray.sub (launch.py)."""
