"""Running on a small machine: the embedded stack, child processes and their supervisor, the frame
loop's priorities, the cache folder, the errors a user can act on."""
