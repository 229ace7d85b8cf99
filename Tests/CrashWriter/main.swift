print("crash writer: not yet")
