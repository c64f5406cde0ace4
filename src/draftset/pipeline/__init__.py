"""The jobs, readable top to bottom: `build` (read → select → mask → write) and `run`."""
