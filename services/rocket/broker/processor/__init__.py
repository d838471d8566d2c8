"""The broker's request processors, one module per RocketMQ processor class."""
