"""rocket.client."""
