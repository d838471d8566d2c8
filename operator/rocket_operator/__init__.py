"""The RocketCluster kopf operator."""
