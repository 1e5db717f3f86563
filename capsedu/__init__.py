"""capsedu: Capsule Networks, taught."""
