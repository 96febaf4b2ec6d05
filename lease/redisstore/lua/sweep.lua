return sweep()
