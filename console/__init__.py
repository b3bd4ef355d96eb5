"""The operator's side: headless commands and the Textual console."""
