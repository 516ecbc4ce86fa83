"""What the ranks train on: the data order of pretraining and the adaptive mixer, packed SFT rows and preference pairs, the chat formats, and synthetic mixes for timing runs."""
