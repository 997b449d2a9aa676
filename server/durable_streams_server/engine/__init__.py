"""Live stream state and the rules that change it."""
