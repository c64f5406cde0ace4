"""`draftset generate`: the target model answers prompts over OpenAI-compatible HTTP."""
