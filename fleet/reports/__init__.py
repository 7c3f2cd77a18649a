"""Reports and plots: the round report (JSON, CSV, Markdown), the paper's experiment grid."""
