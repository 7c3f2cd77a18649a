"""Trust in profiles: coverage gaps, verify-before-trust of predicted points, the profile store."""
