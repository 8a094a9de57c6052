"""`searchrl view`: a run's episodes and curves in the browser (a local page, or one exported file), to read
rollouts for reward hacking. It reads runs through searchrl.episodes and imports nothing above it; nothing imports
it but the command line."""
