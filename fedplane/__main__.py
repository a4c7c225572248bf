from fedplane.cli import main

main()
