from specsched.cli import main

main()
