int store_placeholder_(void); int store_placeholder_(void) { return 0; }
