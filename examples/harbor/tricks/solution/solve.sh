#!/bin/bash
echo solved > /app/result.txt
