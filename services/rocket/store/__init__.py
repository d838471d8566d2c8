"""rocket.store."""
