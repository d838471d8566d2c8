"""rocket.analytics."""
