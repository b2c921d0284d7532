#!/bin/bash
if python3 -c 'import socket; socket.create_connection(("1.1.1.1", 53), timeout=3)' 2>/dev/null
then echo online; else echo offline; fi > /app/network.txt
