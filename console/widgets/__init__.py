"""The console's widgets, one per module. Widgets only render what they are given."""
