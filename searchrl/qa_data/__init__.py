"""Questions and prompt data: the bundled evaluation sets, question files and hub datasets, OpenRLHF prompt
datasets and SFT data."""
