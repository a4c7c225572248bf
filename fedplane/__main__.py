from fedplane.entry import main

main()
