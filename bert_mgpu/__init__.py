"""bert-mgpu's package: everything but the design card's modules (modeling, optimization,
tokenization, multigpu) and the commands, in folders by concern (docs/LAYOUT.md, "The package").

Imports nothing, so that its light parts load without TensorFlow."""
