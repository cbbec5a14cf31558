int gpu_placeholder_(void); int gpu_placeholder_(void) { return 0; }
