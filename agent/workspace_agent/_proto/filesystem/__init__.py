"""Generated from proto/ by scripts/generate-proto. Do not edit."""
