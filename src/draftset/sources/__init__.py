"""Reading sources: files and hub datasets, formats, presets, and the answers `run` overlays."""
