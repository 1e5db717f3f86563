"""The book's experiments; ``shared`` holds what they share. An experiment never imports another, and the
package ``__init__``s here import nothing, so that ``python -m capsedu --help`` needs no torch."""
