"""The command line's commands: one module per command (its parser, its handler, its summary).

Each goes command -> `draftset.api` -> the stages; the options come from `config.schema`.
`draftset.cli` only dispatches. No stage module imports this package.
"""
