"""What every experiment shares: command-line arguments, the result file with its resume rule, runs over seeds."""
