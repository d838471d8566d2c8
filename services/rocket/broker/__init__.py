"""rocket.broker."""
