"""rocket.nameserver."""
