"""porting/decoding/: protobuf wire and text format, and the guard around libraries' errors."""
