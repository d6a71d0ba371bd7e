"""The command line (``dsh-actors``) and the examples it runs."""
