int sched_placeholder_(void); int sched_placeholder_(void) { return 0; }
